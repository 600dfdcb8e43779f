// Command custom-taskhost hosts a task function of its own in amdahl task hosts:
// the same program is the parent, which runs a few units of work through
// the runtime, and (started by the runtime with CUSTOM_TASKHOST_CHILD=1) each
// task host child, which serves the task "example.wordcount" besides the
// built-in ones. It prints each task's outputs and where the time went.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
)

// envChild marks a process started by the runtime as a task host.
const envChild = "CUSTOM_TASKHOST_CHILD"

// taskWordCount is this program's own task.
const taskWordCount = "example.wordcount"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, stdout, stderr io.Writer) int {
	var err error
	if os.Getenv(envChild) == "1" {
		err = serve(ctx)
	} else {
		err = parent(ctx, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "custom-taskhost:", err)
		return 1
	}
	return 0
}

// serve is the child: the built-in tasks plus ours.
func serve(ctx context.Context) error {
	tasks := runtime.BuiltinTasks()
	tasks[taskWordCount] = wordCount
	return runtime.ServeHost(ctx, tasks)
}

// wordCount counts the words of the parameter "text".
func wordCount(_ context.Context, task *ipcpb.TaskConfiguration) (map[string]string, error) {
	text, ok := task.GetParameters()["text"]
	if !ok {
		return nil, errors.New(`parameter "text" is missing`)
	}
	return map[string]string{"words": strconv.Itoa(len(strings.Fields(text)))}, nil
}

var documents = []string{
	"a stage that got twelve times faster moved end to end by a few percent",
	"end to end gain is roughly q times r",
	"measure, don't assume",
	"the share of a phase on the critical path is q",
}

// parent runs one unit of work per document on two task hosts that are
// this program.
func parent(ctx context.Context, stdout io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	set, err := runtime.DefaultSettings()
	if err != nil {
		return err
	}
	set.Nodes, set.Concurrency = 2, 2
	var mu sync.Mutex
	results := map[int]runtime.Result{}
	cfg := runtime.Config{
		Settings: set, Scenario: "custom-taskhost",
		HostArgv: []string{exe}, HostEnv: []string{envChild + "=1"},
		OnResult: func(r runtime.Result) { mu.Lock(); results[r.Seq] = r; mu.Unlock() },
	}
	r, err := runtime.New(ctx, cfg)
	if err != nil {
		return err
	}
	for i, doc := range documents {
		item := scenario.Item{Seq: i, Kind: scenario.KindTask, Task: &scenario.TaskItem{
			TaskName: taskWordCount, Parameters: map[string]string{"text": doc}}}
		if err := r.Submit(ctx, item); err != nil {
			return errors.Join(err, r.Close(context.WithoutCancel(ctx)))
		}
	}
	werr := r.Wait(ctx)
	if err := errors.Join(werr, r.Close(context.WithoutCancel(ctx))); err != nil {
		return err
	}
	seqs := make([]int, 0, len(results))
	for s := range results {
		seqs = append(seqs, s)
	}
	sort.Ints(seqs)
	for _, s := range seqs {
		res := results[s]
		if res.Outcome.String() != "ok" {
			return fmt.Errorf("document %d: %s", s, res.Reason)
		}
		fmt.Fprintf(stdout, "document %d: %s words\n", s, res.Outputs["words"])
	}
	sum := r.Summary()
	fmt.Fprintf(stdout, "\n%d units on %d task hosts\n", sum.Submitted, sum.HostsSpawned)
	return sum.Attribution.WriteText(stdout)
}
