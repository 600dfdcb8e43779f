package ipc

import (
	"strings"
	"testing"
)

func TestParseBufferSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"262144", 262144, false},
		{" 262144 ", 262144, false},
		{"1MiB", 1 << 20, false},
		{"256KiB", 256 << 10, false},
		{"4 MiB", 4 << 20, false},
		{"1024MiB", 1 << 30, false},
		{"1GiB", 1 << 30, false},
		{"1.5MiB", 3 << 19, false},
		{"0.5KiB", 512, false},
		{"1MB", 1_000_000, false},
		{"4096B", 4096, false},
		{"0", 0, true},
		{"0KiB", 0, true},
		{"-5", 0, true},
		{"", 0, true},
		{"junk", 0, true},
		{"+5", 0, true},
		{"1.5", 0, true},
		{"1.5B", 0, true},
		{"1mib", 0, true},
		{"4  MiB", 0, true},
		{"99999999999", 0, true},
		{"1025MiB", 0, true},
		{"1.1GiB", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseBufferSize(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseBufferSize(%q) = %d, want an error", tt.in, got)
				}
				if !strings.Contains(err.Error(), "ipc.buffer") {
					t.Fatalf("error %q does not name the setting", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseBufferSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestBufferResolution(t *testing.T) {
	// Set in the environment to show that nothing reads it: settings reach
	// the package as options only.
	t.Setenv("AMDAHL_IPC_BUFFER", "256KiB")
	t.Setenv("AMDAHL_DISABLE_FEATURES_FROM_VERSION", "0.1")
	tests := []struct {
		name    string
		opts    []Option
		want    int
		wantErr bool
	}{
		{"default", nil, DefaultBufferSize, false},
		{"option", []Option{WithBufferSize(4096)}, 4096, false},
		{"last option wins", []Option{WithBufferSize(4096), WithBufferSize(8192)}, 8192, false},
		{"zero is an error", []Option{WithBufferSize(0)}, 0, true},
		{"above the maximum is an error", []Option{WithBufferSize(MaxBufferSize + 1)}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := resolve("test", tt.opts)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "ipc.buffer") {
					t.Fatalf("resolve = buffer %d, %v; want an error naming ipc.buffer", cfg.buffer, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.buffer != tt.want {
				t.Fatalf("buffer = %d, want %d", cfg.buffer, tt.want)
			}
		})
	}
}

func TestModeSetting(t *testing.T) {
	t.Setenv("AMDAHL_IPC_SEND", "async")
	cfg, err := resolve("test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.mode != Sync {
		t.Fatalf("default mode %v, want sync (the environment is not read)", cfg.mode)
	}
	cfg, err = resolve("test", []Option{WithMode(Async)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.mode != Async {
		t.Fatalf("mode %v with WithMode(Async), want async", cfg.mode)
	}
	if _, err := resolve("test", []Option{WithMode(Mode(7))}); err == nil || !strings.Contains(err.Error(), "ipc.send") {
		t.Fatalf("resolve with mode 7: got %v, want an error naming ipc.send", err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"sync": Sync, " async ": Async} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseMode("fast"); err == nil || !strings.Contains(err.Error(), "ipc.send") {
		t.Errorf("ParseMode(\"fast\") = %v, want an error naming ipc.send", err)
	}
}
