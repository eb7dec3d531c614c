package nodeinstall

import (
	"strings"
	"testing"
)

// FuzzLookupPasswd: any passwd data is read without a panic, and a home
// found is a field of a line that names the user or its uid.
func FuzzLookupPasswd(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/bash\n"), "root")
	f.Add([]byte("# c\nkube:x:990:990::/home/k:/bin/sh\nbad\n"), "990")
	f.Add([]byte(""), "")
	f.Fuzz(func(t *testing.T, data []byte, user string) {
		home, ok := lookupPasswd(data, user)
		if !ok {
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) >= 7 && (fields[0] == user || fields[2] == user) && fields[5] == home {
				return
			}
		}
		t.Fatalf("home %q of %q is on no line of the user", home, user)
	})
}
