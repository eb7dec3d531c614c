// Package featuregates registers pullguard's feature gates on a
// k8s.io/component-base feature gate and reads them once into a Gates value
// that is passed down to the packages that depend on them.
//
// The gates carry the kubelet's names and versioned specs, and pullguard
// evaluates them at EmulationVersion, so both are on by default, as in a
// kubelet of that version.
package featuregates
