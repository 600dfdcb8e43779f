package taskproto

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"google.golang.org/protobuf/proto"
)

// childServeHost is envChild's value that makes the test binary a task
// host served by ServeHost (serveHostChild).
const childServeHost = "servehost"

// serveHostChild serves two tasks: "echo" returns its parameters and the
// settings the host took from its parent; "fail" fails.
func serveHostChild(ctx context.Context) error {
	return ServeHost(ctx, map[string]TaskFunc{
		"echo": func(_ context.Context, task *ipcpb.TaskConfiguration) (map[string]string, error) {
			return task.GetParameters(), nil
		},
		"fail": func(context.Context, *ipcpb.TaskConfiguration) (map[string]string, error) {
			return nil, errors.New("it failed")
		},
	})
}

// TestServeHost runs ServeHost in a real child with the settings a parent
// passes: tasks by name, an unknown name failing that task only, the
// execute delay in the execute phase, the parent's send mode and delta
// setting, and Shutdown ending the host cleanly.
func TestServeHost(t *testing.T) {
	ctx := context.Background()
	p, err := ipc.NewPair()
	if err != nil {
		t.Fatal(err)
	}
	const delay = 20 * time.Millisecond
	set := HostSettings{Buffer: 256 << 10, Send: ipc.Async, Delta: false, ExecuteDelay: delay}
	cmd, stderr := startChild(t, p, envChild+"="+childServeHost, EnvBuffer+"=256KiB", EnvSend+"=async", EnvDelta+"=off", EnvExecuteDelay+"=20ms")
	conn, err := p.Connect(ctx, set.ConnOptions()...)
	if err != nil {
		t.Fatalf("connect: %v (child stderr: %s)", err, stderr)
	}
	defer conn.Close()
	env := map[string]string{"A": "1"}
	for i, tc := range []struct {
		task, wantStatus, wantErr string
	}{
		{"echo", "STATUS_SUCCESS", ""},
		{"nope", "STATUS_FAILURE", `unknown task "nope" in this task host`},
		{"fail", "STATUS_FAILURE", "it failed"},
		{"echo", "STATUS_SUCCESS", ""},
	} {
		sent := time.Now()
		if err := conn.Send(ctx, &ipcpb.TaskConfiguration{Id: uint64(i), TaskName: tc.task, Parameters: map[string]string{"k": "v"}, Environment: env}); err != nil {
			t.Fatalf("send %d: %v (child stderr: %s)", i, err, stderr)
		}
		in, err := conn.Recv(ctx)
		if err != nil {
			t.Fatalf("recv %d: %v (child stderr: %s)", i, err, stderr)
		}
		res := in.Msg.(*ipcpb.TaskResult)
		if res.GetStatus().String() != tc.wantStatus || res.GetError() != tc.wantErr {
			t.Errorf("task %d (%s): status %s error %q, want %s %q", i, tc.task, res.GetStatus(), res.GetError(), tc.wantStatus, tc.wantErr)
		}
		if tc.task == "echo" && res.GetOutputs()["k"] != "v" {
			t.Errorf("task %d: outputs %v, want k=v", i, res.GetOutputs())
		}
		if tc.task != "nope" {
			var exec time.Duration
			for _, tm := range AppendTimings(nil, res, sent, in.ReceiveStart) {
				if tm.Phase.String() == "execute" {
					exec = tm.End.Sub(tm.Start)
				}
			}
			if exec < delay {
				t.Errorf("task %d: execute phase %v, want at least the parent's delay %v", i, exec, delay)
			}
		}
	}
	if err := conn.Send(ctx, &ipcpb.Shutdown{}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Recv(ctx); !errors.Is(err, ipc.ErrPeerClosed) {
		t.Fatalf("Recv after the host's shutdown = %v, want ErrPeerClosed", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v (stderr: %s)", err, stderr)
	}
}

// TestHostLogger: a host logs what it ignores (a packet it does not
// expect) to the logger WithHostLogger gives it, not to slog's default.
func TestHostLogger(t *testing.T) {
	ctx := context.Background()
	var logged bytes.Buffer
	cfg := hostConfig{logger: slog.Default()}
	WithHostLogger(slog.New(slog.NewJSONHandler(&logged, nil)))(&cfg)
	parent, child := pair(t, []ipc.Option{WithCodec()}, []ipc.Option{WithCodec()})
	done := make(chan error, 1)
	go func() { done <- serve(ctx, child, nil, cfg, 0) }()
	for _, m := range []proto.Message{&ipcpb.LogMessage{TaskId: 1, Text: "hi"}, &ipcpb.Shutdown{}} {
		if err := parent.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if got := logged.String(); !strings.Contains(got, `"msg":"taskhost: ignoring unexpected packet"`) {
		t.Errorf("the host's logger got %q, want its warning about the log message", got)
	}
}

func TestServeHostNotAChild(t *testing.T) {
	err := ServeHost(context.Background(), nil, WithHostLookupEnv(func(string) (string, bool) { return "", false }))
	if !errors.Is(err, ipc.ErrNotChild) {
		t.Errorf("ServeHost outside an amdahl parent = %v, want ipc.ErrNotChild", err)
	}
}

func TestHostSettingsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	got, err := HostSettingsFromEnv(env())
	if err != nil || got != (HostSettings{Delta: true}) {
		t.Errorf("no variables: %+v, %v; want ipc's defaults with delta on", got, err)
	}
	got, err = HostSettingsFromEnv(env(EnvBuffer, "1.5MiB", EnvSend, "async", EnvDelta, "off", EnvExecuteDelay, "200us"))
	if want := (HostSettings{Buffer: 3 << 19, Send: ipc.Async, ExecuteDelay: 200 * time.Microsecond}); err != nil || got != want {
		t.Errorf("all set: %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range [][2]string{{EnvBuffer, "0"}, {EnvBuffer, "9GiB"}, {EnvSend, "fast"}, {EnvDelta, "yes"}, {EnvExecuteDelay, "2s"}, {EnvExecuteDelay, "-1ms"}, {EnvExecuteDelay, "soon"}} {
		_, err := HostSettingsFromEnv(env(bad[0], bad[1]))
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v, want an error naming the variable", bad[0], bad[1], err)
		}
	}
}
