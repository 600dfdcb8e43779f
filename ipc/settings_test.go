package ipc

import (
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/internal/features"
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
				if !strings.Contains(err.Error(), "ipc.buffer") || !strings.Contains(err.Error(), EnvBuffer) {
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
	tests := []struct {
		name    string
		env     map[string]string
		opts    []Option
		want    int
		wantErr bool
	}{
		{"wave default", nil, nil, DefaultBufferSize, false},
		{"wave disabled restores legacy", map[string]string{features.EnvDisableFrom: "0.1"}, nil, LegacyBufferSize, false},
		{"wave disabled below lowest", map[string]string{features.EnvDisableFrom: "0.0"}, nil, LegacyBufferSize, false},
		{"env wins over wave", map[string]string{features.EnvDisableFrom: "0.1", EnvBuffer: "256KiB"}, nil, 256 << 10, false},
		{"option wins over env", map[string]string{EnvBuffer: "256KiB"}, []Option{WithBufferSize(4096)}, 4096, false},
		{"invalid env is an error", map[string]string{EnvBuffer: "-5"}, nil, 0, true},
		{"invalid option is an error", nil, []Option{WithBufferSize(0)}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(features.EnvDisableFrom, "")
			t.Setenv(EnvBuffer, "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if _, ok := tt.env[EnvBuffer]; !ok {
				unsetenv(t, EnvBuffer)
			}
			features.Reset()
			t.Cleanup(features.Reset)
			cfg, err := resolve("test", tt.opts)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("resolve = buffer %d, want an error", *cfg.buffer)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *cfg.buffer != tt.want {
				t.Fatalf("buffer = %d, want %d", *cfg.buffer, tt.want)
			}
		})
	}
}

func TestModeAndDeltaSettings(t *testing.T) {
	t.Setenv(EnvMode, "async")
	t.Setenv(EnvDelta, "off")
	cfg, err := resolve("test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.mode != Async || *cfg.delta {
		t.Fatalf("mode %v delta %v from env, want async and off", *cfg.mode, *cfg.delta)
	}
	cfg, err = resolve("test", []Option{WithMode(Sync), WithDelta(true)})
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.mode != Sync || !*cfg.delta {
		t.Fatalf("options did not win over env: mode %v delta %v", *cfg.mode, *cfg.delta)
	}
	t.Setenv(EnvMode, "fast")
	if _, err := resolve("test", nil); err == nil || !strings.Contains(err.Error(), "ipc.send") {
		t.Fatalf("resolve with %s=fast: got %v, want an error naming ipc.send", EnvMode, err)
	}
}
