package sockops

import "fmt"

// MaxLowatExcept is how many congestion controls the programs can except
// from TCP_NOTSENT_LOWAT (bpf/ccname.h's CC_LIST_MAX).
const MaxLowatExcept = 4

// ccNames fills a program's list of congestion control names
// (bpf/ccname.h: NUL-padded, an empty name ends it). The policies check
// the names a user gives; this refuses what the program cannot hold.
func ccNames(dst *[MaxLowatExcept][16]int8, names []string) error {
	if len(names) > MaxLowatExcept {
		return fmt.Errorf("%d congestion controls to except from TCP_NOTSENT_LOWAT; the program holds %d", len(names), MaxLowatExcept)
	}
	*dst = [MaxLowatExcept][16]int8{}
	for i, n := range names {
		if n == "" || len(n) > 15 {
			return fmt.Errorf("congestion control name %q: want 1 to 15 bytes", n)
		}
		for j := 0; j < len(n); j++ {
			dst[i][j] = int8(n[j])
		}
	}
	return nil
}
