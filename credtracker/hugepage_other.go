//go:build !linux

package credtracker

func madviseHuge([]byte) error     { return nil }
func madviseCollapse([]byte) error { return nil }
