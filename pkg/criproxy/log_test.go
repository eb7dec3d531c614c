package criproxy_test

import "k8s.io/klog/v2"

func testLogger() klog.Logger { return klog.Background() }
