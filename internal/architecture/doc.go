// Package architecture holds no code: its test keeps docs/architecture.md
// true. It lists every package of the module with the module packages it
// may import (the rooms and who may import whom), checks the imports the
// code really has against that table, checks that the libraries (ipc,
// chunking, telemetry) pull in no OpenTelemetry SDK, exporter, Prometheus
// client or profiler, checks the tests' imports too, and checks that
// docs/architecture.md names every package and holds the table, rendered
// (go test ./internal/architecture -update rewrites it). A new package, or a new import across rooms, fails the test
// until the table and the document say where it belongs.
package architecture
