package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// TestStartedByHand: outside an amdahl parent the host says what it is.
func TestStartedByHand(t *testing.T) {
	for _, k := range []string{ipc.EnvFD, ipc.EnvToken} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var errb bytes.Buffer
	if code := realMain(context.Background(), &errb); code != 2 || !strings.Contains(errb.String(), "is a task host") {
		t.Errorf("exit %d, stderr %q; want 2 and a message saying it is a task host", code, errb.String())
	}
}

func TestWordCount(t *testing.T) {
	out, err := wordCount(context.Background(), &ipcpb.TaskConfiguration{Parameters: map[string]string{"text": "measure, don't assume"}})
	if err != nil || out["words"] != "3" {
		t.Errorf("wordCount = %v, %v; want 3 words", out, err)
	}
	if _, err := wordCount(context.Background(), &ipcpb.TaskConfiguration{}); err == nil {
		t.Error("wordCount without text: nil error")
	}
}
