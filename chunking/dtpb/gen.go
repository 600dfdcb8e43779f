package dtpb

// Generator versions are pinned: protoc 3.21.12 (Debian protobuf-compiler)
// and protoc-gen-go v1.36.12; regen_test.go proves the committed code is
// current.

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative amdahl_durabletask.proto
