// Package timescale stretches the lab's and the tests' waits for
// something to start where everything runs slower than here: make
// test-kernels sets MPSTEER_TIME_SCALE in its software-emulated guests.
package timescale

import (
	"os"
	"strconv"
	"time"
)

// Env names the factor by which waits are stretched.
const Env = "MPSTEER_TIME_SCALE"

// Scaled is d stretched by $MPSTEER_TIME_SCALE (1 when unset or bad).
func Scaled(d time.Duration) time.Duration {
	f, err := strconv.ParseFloat(os.Getenv(Env), 64)
	if err != nil || f < 1 {
		return d
	}
	return time.Duration(float64(d) * f)
}
