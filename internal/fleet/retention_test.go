package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetentionFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
		err  bool
	}{
		{env: "", want: RetentionDefault},
		{env: "0", want: 0},
		{env: "0d", want: 0},
		{env: "7d", want: 7 * 24 * time.Hour},
		{env: "72h", want: 72 * time.Hour},
		{env: "90m", want: 90 * time.Minute},
		{env: "1m", want: time.Minute},
		{env: "30s", err: true},
		{env: "-1h", err: true},
		{env: "-1d", err: true},
		{env: "1.5d", err: true},
		{env: "30", err: true},
		{env: "a month", err: true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("AGENTFLEET_RETENTION", tc.env)
			cfg, err := ConfigFromEnv()
			if tc.err {
				require.ErrorContains(t, err, fmt.Sprintf(`AGENTFLEET_RETENTION=%q must be 0 (keep every run) or a duration of at least 1m`, tc.env))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Retention)
		})
	}
}
