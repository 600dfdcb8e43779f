package ipc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLookupInherited(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    []int
		wantErr string // a substring; "" for success
	}{
		{"socket", map[string]string{EnvFD: "3", EnvToken: tok.String()}, []int{3}, ""},
		{"pipes", map[string]string{EnvFD: "3,4", EnvToken: tok.String()}, []int{3, 4}, ""},
		{"spaces", map[string]string{EnvFD: " 5 , 6 ", EnvToken: " " + tok.String() + " "}, []int{5, 6}, ""},
		{"no fd", map[string]string{EnvToken: tok.String()}, nil, "not meant to be started by hand"},
		{"no token", map[string]string{EnvFD: "3"}, nil, "not meant to be started by hand"},
		{"stdio fd", map[string]string{EnvFD: "2", EnvToken: tok.String()}, nil, EnvFD + `="2"`},
		{"not a number", map[string]string{EnvFD: "3,x", EnvToken: tok.String()}, nil, EnvFD + `="3,x"`},
		{"three fds", map[string]string{EnvFD: "3,4,5", EnvToken: tok.String()}, nil, "one socket fd or two pipe fds"},
		{"bad token", map[string]string{EnvFD: "3", EnvToken: "abc"}, nil, EnvToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LookupInherited(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LookupInherited = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "by hand") && !errors.Is(err, ErrNotChild) {
					t.Fatalf("error %v does not match ErrNotChild", err)
				}
				return
			}
			if err != nil || !slices.Equal(got.FDs, tt.want) || got.Token != tok {
				t.Fatalf("LookupInherited = %v, %v; want fds %v and the token", got.FDs, err, tt.want)
			}
		})
	}
}

func TestAcceptInheritedRejectsBadFDs(t *testing.T) {
	for _, fds := range [][]int{nil, {1}, {3, 4, 5}} {
		if _, err := AcceptInherited(context.Background(), Inherited{FDs: fds}); err == nil {
			t.Errorf("AcceptInherited(fds %v) succeeded, want an error", fds)
		}
	}
}
