// Package dtpb holds amdahl's wire-compatible subset of the Durable Task
// protocol (durabletask-protobuf orchestrator_service.proto): the generated
// messages of amdahl_durabletask.proto and a hand-written gRPC service
// descriptor whose method paths are the original /TaskHubSidecarService/...
// ones. See amdahl_durabletask.proto for why the protobuf package is
// qualified while the service name is not.
package dtpb
