// Command pause is the sandbox and the test images' entrypoint in the
// kubelet e2e test: it waits for SIGTERM or SIGINT and exits 0. It is built
// static (CGO_ENABLED=0) so that it runs in an image with nothing else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
