// Command respond is the credential provider plugin of the in-process
// differential tests (pluginexec_test.go): run as `respond PREFIX`, it
// saves its stdin (the kubelet's request) in PREFIX.req and prints
// PREFIX.resp, the answer under test, unchanged. It is one small static
// program rather than a shell script so that a look-up starts one process.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fail("usage: respond PREFIX")
	}
	prefix := os.Args[1]
	req, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("read the request: %v", err)
	}
	resp, err := os.ReadFile(prefix + ".resp")
	if err != nil {
		fail("read the answer: %v", err)
	}
	if err := os.WriteFile(prefix+".req", req, 0o600); err != nil {
		fail("save the request: %v", err)
	}
	if _, err := os.Stdout.Write(resp); err != nil {
		fail("write the answer: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "respond: "+format+"\n", args...)
	os.Exit(1)
}
