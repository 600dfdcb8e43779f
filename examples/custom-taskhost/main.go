// Command custom-taskhost is a task host of one's own: a program that
// serves the task "example.wordcount" to an amdahl parent over the pipe,
// with taskproto.ServeHost, as go-plugin's Serve serves a plugin. It links
// the task-host protocol and the OpenTelemetry API only: no SDK, exporter
// or profiler (a host that wants amdahl's own telemetry calls
// runtime.ServeHost instead). Started by hand it says what it is and
// exits; the program in ./parent runs units of work on it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
)

// taskWordCount is this program's task.
const taskWordCount = "example.wordcount"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, stderr io.Writer) int {
	err := taskproto.ServeHost(ctx, map[string]taskproto.TaskFunc{taskWordCount: wordCount})
	switch {
	case errors.Is(err, ipc.ErrNotChild):
		fmt.Fprintln(stderr, "custom-taskhost is a task host: an amdahl parent starts it (go run ./examples/custom-taskhost/parent -host PATH)")
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "custom-taskhost:", err)
		return 1
	}
	return 0
}

// wordCount counts the words of the parameter "text".
func wordCount(_ context.Context, task *ipcpb.TaskConfiguration) (map[string]string, error) {
	text, ok := task.GetParameters()["text"]
	if !ok {
		return nil, errors.New(`parameter "text" is missing`)
	}
	return map[string]string{"words": strconv.Itoa(len(strings.Fields(text)))}, nil
}
