package cli

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/resource"
	logsapi "k8s.io/component-base/logs/api/v1"
	logsjson "k8s.io/component-base/logs/json"
	"k8s.io/klog/v2"
)

// loggingOptions are component-base's logging flags, which every upstream sidecar
// registers beside klog's -v and --vmodule.
type loggingOptions struct {
	format         string
	flushFrequency time.Duration
	textSplit      bool
	jsonSplit      bool
	textBuffer     quantityValue
	jsonBuffer     quantityValue
	klog           *flag.FlagSet // klog's own flags, for -v
}

const reasonAlphaLogging = "kubevol writes every log line to stderr, unbuffered"

func (l *loggingOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&l.format, "logging-format", "text", `Sets the log format. Permitted formats: "json", "text".`)
	f.DurationVar(&l.flushFrequency, logsapi.LogFlushFreqFlagName, 5*time.Second, "Maximum number of seconds between log flushes")
	f.BoolVar(&l.textSplit, "log-text-split-stream", false, "[Alpha] In text format, write error messages to stderr and info messages to stdout.")
	f.Var(&l.textBuffer, "log-text-info-buffer-size", "[Alpha] In text format with split output streams, the size of the info messages' buffer (512, 1K, 2Ki, 3M ...).")
	f.BoolVar(&l.jsonSplit, "log-json-split-stream", false, "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.")
	f.Var(&l.jsonBuffer, "log-json-info-buffer-size", "[Alpha] In JSON format with split output streams, the size of the info messages' buffer (512, 1K, 2Ki, 3M ...).")
	noEffect(f, reasonAlphaLogging, "log-text-split-stream", "log-text-info-buffer-size", "log-json-info-buffer-size")
	// --log-json-split-stream is honoured (apply).
}

// defaultFlushFrequency is klog's own flush period, which the flag's default keeps.
const defaultFlushFrequency = 5 * time.Second

// flushChanged records that apply moved klog's flush daemon off its default.
var flushChanged atomic.Bool

// apply validates the flags and installs the log format; resetLogging undoes it, as the
// end of every command line does (tests run many in one process).
func (l *loggingOptions) apply(stdout, stderr io.Writer) error {
	if l.flushFrequency <= 0 {
		return usageErrorf("--%s must be positive, got %s", logsapi.LogFlushFreqFlagName, l.flushFrequency)
	}
	if l.flushFrequency != defaultFlushFrequency {
		klog.StartFlushDaemon(l.flushFrequency)
		flushChanged.Store(true)
	}
	switch l.format {
	case "text", "":
		if l.jsonSplit {
			klog.Warning("Flag --log-json-split-stream has no effect with --logging-format=text")
		}
		return nil
	case "json":
	default:
		return usageErrorf(`--logging-format %q: permitted formats are "json" and "text"`, l.format)
	}
	v := 0
	if fl := l.klog.Lookup("v"); fl != nil {
		v, _ = strconv.Atoi(fl.Value.String())
	}
	errStream := zapcore.Lock(logsjson.AddNopSync(stderr))
	var logger, control = logsjson.NewJSONLogger(logsapi.VerbosityLevel(v), errStream, nil, nil)
	if l.jsonSplit {
		// Upstream's split: info messages to stdout, errors to stderr.
		logger, control = logsjson.NewJSONLogger(logsapi.VerbosityLevel(v), zapcore.Lock(logsjson.AddNopSync(stdout)), errStream, nil)
	}
	// Not a contextual logger: every line still passes klog's filter, which redacts secrets.
	klog.SetLoggerWithOptions(logger, klog.FlushLogger(control.Flush))
	return nil
}

// resetLogging flushes the logs and puts klog back to its text format and flush period.
func resetLogging() {
	klog.Flush()
	klog.ClearLogger()
	if flushChanged.Swap(false) {
		klog.StartFlushDaemon(defaultFlushFrequency)
	}
}

// quantityValue is a byte size in Kubernetes quantity form (512, 1K, 2Ki).
type quantityValue struct{ q resource.Quantity }

func (q *quantityValue) String() string { return q.q.String() }
func (q *quantityValue) Type() string   { return "quantity" }
func (q *quantityValue) Set(s string) error {
	v, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a quantity: %w", s, err)
	}
	if v.Sign() < 0 {
		return fmt.Errorf("%q must not be negative", s)
	}
	q.q = v
	return nil
}
