package proc

import (
	"os/exec"
	"testing"
)

func TestExitReason(t *testing.T) {
	for script, want := range map[string]string{"exit 3": "exit code 3", "kill -KILL $$": "signal SIGKILL", "true": "exit code 0"} {
		err := exec.Command("sh", "-c", script).Run()
		if got := ExitReason(err); got != want {
			t.Errorf("%q: ExitReason = %q, want %q", script, got, want)
		}
	}
}
