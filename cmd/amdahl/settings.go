package main

import (
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/spf13/cobra"
)

// newSettingsTopic is the help topic `amdahl help settings`: every setting
// with its environment variable, default and valid values. It runs
// nothing; run, ab and report point to it so their own help fits a screen.
func newSettingsTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "settings",
		Short: "Every setting: name, environment variable, default, valid values",
		Long: `Every knob of amdahl has one name, set with --set name=value (repeatable;
amdahl run and amdahl ab, --baseline and --candidate) or with its
environment variable. Precedence: --set > environment > default. The
defaults marked with a feature wave change with
AMDAHL_DISABLE_FEATURES_FROM_VERSION=X.Y (0.1 restores the legacy ones);
a value that is not a version is bad usage (exit 2).

` + runtime.SettingsHelp() + `
Sizes take the one size grammar: a whole number of bytes, or a number with
B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024): 262144,
46KB, 1.5MiB.`,
		Example: `  amdahl run --set ipc.buffer=128KiB --set ipc.send=async
  AMDAHL_IPC_BUFFER=1MiB amdahl run --scenario taskhost
  amdahl ab --baseline chunking.algorithm=legacy --candidate chunking.algorithm=cached --scenario fanout`,
	}
}
