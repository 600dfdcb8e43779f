// Package ipcpb holds the protobuf packets (proto package amdahl.ipc.v1)
// that package ipc frames on the wire. The generated code is committed;
// TestGenerated in package ipc proves it is current.
//
// Generated with protoc 3.21.12 and protoc-gen-go v1.36.12.
package ipcpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative ipc.proto
