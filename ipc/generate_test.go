package ipc

import (
	"testing"

	"github.com/amdahl-rt/amdahl/internal/protogen"
)

// TestGenerated checks that ipcpb/ipc.pb.go is what the pinned generators
// produce from ipcpb/ipc.proto.
func TestGenerated(t *testing.T) { protogen.CheckCurrent(t, "ipcpb", "ipc.proto") }
