package proccpu

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadWindow(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, data string
		want       Window
		err        string
	}{
		{"ok", `{"cpu_at_start_ns":7854000,"cpu_at_stop_ns":1128343000}`, Window{Start: 7854 * time.Microsecond, Stop: 1128343 * time.Microsecond}, ""},
		{"sysmon", `{"cpu_at_start_ns":100,"cpu_at_stop_ns":2000,"sysmon_cpu_ns":1500}`, Window{Start: 100, Stop: 2000, Sysmon: ptr(1500)}, ""},
		{"written", `{"cpu_at_start_ns":100,"cpu_at_stop_ns":2000,"cpu_at_written_ns":2500}`, Window{Start: 100, Stop: 2000, Written: 2500}, ""},
		{"written before stop", `{"cpu_at_start_ns":100,"cpu_at_stop_ns":2000,"cpu_at_written_ns":1999}`, Window{}, "runs backwards"},
		{"sysmon over the window", `{"cpu_at_start_ns":100,"cpu_at_stop_ns":2000,"sysmon_cpu_ns":20000}`, Window{}, "not within the window"},
		{"sysmon negative", `{"cpu_at_start_ns":100,"cpu_at_stop_ns":2000,"sysmon_cpu_ns":-1}`, Window{}, "not within the window"},
		{"backwards", `{"cpu_at_start_ns":9,"cpu_at_stop_ns":8}`, Window{}, "runs backwards"},
		{"negative", `{"cpu_at_start_ns":-1,"cpu_at_stop_ns":8}`, Window{}, "runs backwards"},
		{"not json", `cpu`, Window{}, "invalid character"},
		{"too long", `{"cpu_at_start_ns":1,"cpu_at_stop_ns":2}` + strings.Repeat(" ", maxWindowFile), Window{}, "over 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadWindow(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
					t.Fatalf("ReadWindow: %v, want an error naming %s and saying %q", err, path, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ReadWindow: %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := ReadWindow(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
}

func ptr(d time.Duration) *time.Duration { return &d }
