package runner

import (
	"context"
	"errors"
)

// startDaemons starts `mpsteer daemon` in the hosts that the variant
// configures, and returns a function that stops them and reports what
// they said about themselves.
func (r *variantRun) startDaemons(ctx context.Context) (func() map[string]any, error) {
	if len(r.v.Daemon) == 0 {
		return func() map[string]any { return nil }, nil
	}
	return nil, errors.New("daemon variants are not supported yet")
}
