// Package architecture holds no code: its test keeps docs/architecture.md
// true. It lists the rooms of the module (bottom first) and every package
// with the module packages it may import, checks the imports the code
// really has against both (no import from a room above; internal/ holds
// the foundations and, apart in internal/report/, the report page), checks
// that the libraries (ipc, chunking, telemetry) pull in no OpenTelemetry
// SDK, exporter, Prometheus client or profiler, checks the tests' imports
// too, and checks that docs/architecture.md names every package and holds
// both tables, rendered (go test ./internal/architecture -update rewrites
// them). A new package, or a new import across rooms, fails the test until
// the tables and the document say where it belongs. It also holds the
// sizes: no production file over 700 lines, no function over 100 without a
// reason beside it.
package architecture
