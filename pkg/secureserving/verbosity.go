package secureserving

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// MaxVerbosity is the highest log verbosity serve runs at with the secure
// endpoint on. From -v=8 up, client-go logs the body of each API request,
// and a TokenReview's body is the token of the client being reviewed;
// k8s.io/apiserver's token cache makes the review with a context of its
// own, so no logger in the scrape's context can keep it out.
const MaxVerbosity = 7

// CheckVerbosity refuses a log verbosity that would log a client's token:
// klog's -v above MaxVerbosity, or a --vmodule (pattern=N,...) with an N
// above it.
func CheckVerbosity(vmodule string) error {
	if klog.V(MaxVerbosity + 1).Enabled() {
		return fmt.Errorf("-v is above %d with --secure-port set: client-go would log the body of each TokenReview, which is a client's token", MaxVerbosity)
	}
	for _, rule := range strings.Split(vmodule, ",") {
		_, level, ok := strings.Cut(rule, "=")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(level)); err == nil && n > MaxVerbosity {
			return fmt.Errorf("--vmodule %q sets a verbosity above %d with --secure-port set: client-go would log the body of each TokenReview, which is a client's token", rule, MaxVerbosity)
		}
	}
	return nil
}
