package otelsetup

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// An ad-hoc pyroscope address silently replaces ServerAddress: never let
	// one from the environment reach the tests.
	os.Unsetenv("PYROSCOPE_ADHOC_SERVER_ADDRESS")
	goleak.VerifyTestMain(m,
		// pyroscope-go's upload workers and the OTel batch processor are
		// stopped by Shutdown; the opencensus-free grpc client leaves none.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	)
}
