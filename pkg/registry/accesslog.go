package registry

import (
	"io"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// FormatAccessLogLine returns the line WithAccessLog writes for r: logfmt
// key=value pairs in a fixed order, ending in a newline,
//
//	time=2026-01-02T15:04:05.123456789Z method=HEAD path="/v2/team-a/app/manifests/v1" kind=manifest repo=team-a/app ref=v1 status=200 bytes=0 user=alice claimed=alice duration=1.2ms
//
// time is RFC 3339 with nanoseconds in UTC; path is quoted with Go
// escaping and carries no query; repo, ref, user and claimed are "-" when
// empty. user is the authenticated user, claimed the name the credentials
// gave (so a rejected login shows user=- claimed=NAME). No password or
// Authorization header is ever written.
func FormatAccessLogLine(r Request) string {
	b := make([]byte, 0, 256)
	b = append(b, "time="...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, " method="...)
	b = append(b, r.Method...)
	b = append(b, " path="...)
	b = strconv.AppendQuote(b, r.Path)
	b = append(b, " kind="...)
	b = append(b, r.Kind...)
	b = appendField(b, " repo=", r.Repository)
	b = appendField(b, " ref=", r.Reference)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, r.Bytes, 10)
	b = appendField(b, " user=", r.User)
	b = appendField(b, " claimed=", r.Claimed)
	b = append(b, " duration="...)
	b = append(b, r.Duration.String()...)
	b = append(b, '\n')
	return string(b)
}

// appendField appends key and v, "-" for an empty v, quoting a v that
// would break the line into fields (repository names and references never
// need it; claimed user names might).
func appendField(b []byte, key, v string) []byte {
	b = append(b, key...)
	switch {
	case v == "":
		return append(b, '-')
	case needsQuote(v):
		return strconv.AppendQuote(b, v)
	}
	return append(b, v...)
}

func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '"' || c == '=' || c >= 0x7f {
			return true
		}
	}
	return false
}

// accessLogger writes each request to klog and, when set, to a writer.
type accessLogger struct {
	logger klog.Logger
	mu     sync.Mutex
	w      io.Writer
}

// verbosity is the klog level of the per-request line.
const verbosity = 2

func (a *accessLogger) log(r Request) {
	if l := a.logger.V(verbosity); l.Enabled() {
		l.Info("Registry request", "method", r.Method, "path", r.Path, "kind", r.Kind,
			"repository", r.Repository, "reference", r.Reference, "status", r.Status,
			"bytes", r.Bytes, "user", r.User, "claimedUser", r.Claimed, "duration", r.Duration)
	}
	if a.w == nil {
		return
	}
	line := FormatAccessLogLine(r)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := io.WriteString(a.w, line); err != nil {
		a.logger.Error(err, "Failed to write the registry access log")
	}
}
