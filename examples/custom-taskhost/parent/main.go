// Command parent runs a few units of work on task hosts that are the
// program examples/custom-taskhost (a task host of one's own, built
// separately): it starts a runtime.Runtime whose hosts are that binary
// (Config.Hosts.Argv), submits one unit of work per document for the task
// "example.wordcount", and prints each task's outputs and where the time
// went.
//
//	go build -o wordcount-host ./examples/custom-taskhost
//	go run ./examples/custom-taskhost/parent -host ./wordcount-host
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"sync"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
)

// taskWordCount is the task the custom host serves.
const taskWordCount = "example.wordcount"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("parent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	host := fl.String("host", "", "the task host program (built from ./examples/custom-taskhost)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *host == "" {
		fmt.Fprintln(stderr, "parent: -host is required: go build -o wordcount-host ./examples/custom-taskhost, then -host ./wordcount-host")
		return 2
	}
	if err := parent(ctx, *host, stdout); err != nil {
		fmt.Fprintln(stderr, "parent:", err)
		return 1
	}
	return 0
}

var documents = []string{
	"a stage that got twelve times faster moved end to end by a few percent",
	"end to end gain is roughly q times r",
	"measure, don't assume",
	"the share of a phase on the critical path is q",
}

// parent runs one unit of work per document on two task hosts that are
// the program host.
func parent(ctx context.Context, host string, stdout io.Writer) error {
	set, err := runtime.DefaultSettings()
	if err != nil {
		return err
	}
	set.Nodes, set.Concurrency = 2, 2
	var mu sync.Mutex
	results := map[int]runtime.Result{}
	cfg := runtime.Config{
		Settings: set, Scenario: "custom-taskhost",
		Hosts:    runtime.HostsConfig{Argv: []string{host}},
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
