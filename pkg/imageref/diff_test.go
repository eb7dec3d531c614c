package imageref_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/imageref"
)

// corpus reads testdata/names.txt: the names of the kubelet's and
// distribution/reference's own test tables, plus the cases.
func corpus(t testing.TB) []string {
	t.Helper()
	f, err := os.Open("testdata/names.txt")
	require.NoError(t, err)
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, err := strconv.Unquote(line)
		require.NoError(t, err, "testdata/names.txt: %s", line)
		names = append(names, n)
	}
	require.NoError(t, sc.Err())
	long := strings.Repeat("a", 260)
	names = append(names,
		"registry.example/"+long[:255], "registry.example/"+long[:250]+"/"+long[:4], "registry.example/"+long[:250]+"/bcdef",
		long[:247], long[:248], "reg.example:5000/"+strings.Repeat("a/", 127)+"a",
		"app:"+strings.Repeat("t", 128), "app:"+strings.Repeat("t", 129))
	return names
}

// compare checks imageref.Parse against distribution/reference's
// ParseNormalizedNamed and ParseDockerRef on one input.
func compare(t testing.TB, s string) {
	t.Helper()
	got, err := imageref.Parse(s)
	want, werr := reference.ParseNormalizedNamed(s)
	if (err == nil) != (werr == nil) {
		t.Fatalf("Parse(%q): error %v, distribution/reference: %v", s, err, werr)
	}
	// Name, the decision path's entry, is Parse's name and error.
	if name, nerr := imageref.Name(s); name != got.Name || fmt.Sprint(nerr) != fmt.Sprint(err) {
		t.Fatalf("Name(%q) = %q, %v; Parse gives %q, %v", s, name, nerr, got.Name, err)
	}
	if werr != nil {
		var e *imageref.Error
		if !errors.As(err, &e) || !errors.Is(err, imageref.ErrInvalid) {
			t.Fatalf("Parse(%q): error %v is not an *imageref.Error of class ErrInvalid", s, err)
		}
		if e.Reason().Error() != werr.Error() {
			t.Fatalf("Parse(%q): reason %q, distribution/reference says %q", s, e.Reason(), werr)
		}
		if class := classOf(werr); !errors.Is(err, class) {
			t.Fatalf("Parse(%q): error %v is not of class %v as distribution/reference's %v", s, err, class, werr)
		}
		if _, derr := reference.ParseDockerRef(s); derr == nil {
			t.Fatalf("ParseDockerRef(%q) accepts what ParseNormalizedNamed rejects", s)
		}
		return
	}
	var tag, dig string
	if tg, ok := want.(reference.Tagged); ok {
		tag = tg.Tag()
	}
	if dg, ok := want.(reference.Digested); ok {
		dig = dg.Digest().String()
	}
	if got.Name != want.Name() || got.Domain != reference.Domain(want) || got.Path != reference.Path(want) ||
		got.Tag != tag || got.Digest != dig || got.String() != want.String() {
		t.Fatalf("Parse(%q) = %+v, distribution/reference: name %q domain %q path %q tag %q digest %q",
			s, got, want.Name(), reference.Domain(want), reference.Path(want), tag, dig)
	}
	dref, derr := reference.ParseDockerRef(s)
	if derr != nil || dref.String() != got.DockerRef() {
		t.Fatalf("DockerRef(%q) = %q, ParseDockerRef: %v, %v", s, got.DockerRef(), dref, derr)
	}
	if !imageref.Valid(s) {
		t.Fatalf("Valid(%q) = false after Parse accepted it", s)
	}
}

// classOf names the class of a distribution/reference error: its error
// variable, or, for the two reasons it formats without wrapping one, the
// class imageref gives them.
func classOf(err error) error {
	for _, class := range []error{reference.ErrReferenceInvalidFormat, reference.ErrNameContainsUppercase,
		reference.ErrNameTooLong, reference.ErrNameEmpty, reference.ErrTagInvalidFormat,
		digest.ErrDigestInvalidFormat, digest.ErrDigestInvalidLength, digest.ErrDigestUnsupported} {
		if errors.Is(err, class) {
			return class
		}
	}
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "invalid reference format: repository name (") && strings.HasSuffix(msg, ") must be lowercase"):
		return reference.ErrNameContainsUppercase
	case strings.HasSuffix(msg, "cannot specify 64-byte hexadecimal strings"):
		return imageref.ErrHexName
	}
	return err
}

// TestCorpusMatchesDistribution runs every name of the corpus through both
// parsers.
func TestCorpusMatchesDistribution(t *testing.T) {
	for _, s := range corpus(t) {
		compare(t, s)
	}
}

// FuzzDifferential is the proof that pullguard has the kubelet's image
// name grammar: for any input, imageref.Parse and distribution/reference
// agree on accept or reject, the normalized name, domain, path, tag,
// digest, the ParseDockerRef form, and the error's class and message.
func FuzzDifferential(f *testing.F) {
	for _, s := range corpus(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		compare(t, s)
	})
}
