package testutil

import (
	"flag"
	"testing"
)

// FuzzMain runs a package's tests with the fuzzer's minimization off
// unless -fuzzminimizetime is given (give it, e.g. 60s, to have new and
// failing inputs minimized as go test does by default); call it from the
// package's TestMain: os.Exit(testutil.FuzzMain(m)).
//
// When fuzzing finds an input that reaches new code, a worker minimizes it
// before it fuzzes on: go test's minimizer tries removing every span of
// the input, a number of runs quadratic in its length, for up to
// -fuzzminimizetime (60 s by default), and reports the runs it made only
// when it is done. With seeds of a few KB (the shipped scenarios, configs)
// every new input held a worker for the whole minute, and `go test -fuzz`
// logged 0 execs a second to the end of the run — and passed.
func FuzzMain(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if !given {
		flag.Set("test.fuzzminimizetime", "0s")
	}
	return m.Run()
}
