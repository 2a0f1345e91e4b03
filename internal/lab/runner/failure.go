package runner

import (
	"fmt"
	"strings"

	"mpsteer/internal/lab/report"
)

// When a run does not count. A run fails when its traffic did not finish
// (stopped at the time limit, or a transfer broke off), when a traffic
// generator or the recorder failed, when an event could not be applied,
// when a daemon or mptcpd died or stopped answering (all of which the run
// records in its summary's errors), or when short flows did not complete.
// A failed run stays on disk with its reason, is run once more in the
// same round, and never enters a statistic; the report counts it.

// failureOf is why a run with this summary does not count ("" when it
// does).
func failureOf(sum *report.Summary) string {
	var why []string
	why = append(why, sum.Errors...)
	if f := sum.Flows; f != nil && f.Failed > 0 {
		msg := fmt.Sprintf("%d of %d short flows did not complete", f.Failed, f.Count)
		if len(why) == 0 || !strings.HasSuffix(why[len(why)-1], msg) {
			why = append(why, msg)
		}
	}
	return strings.Join(why, "; ")
}
