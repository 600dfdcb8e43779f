//go:build race

package main

// raceBuild: the test binary (and so every amdahl it runs as a child) is
// built with -race.
const raceBuild = true
