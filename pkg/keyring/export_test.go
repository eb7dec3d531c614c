package keyring

// Test-only access to the two image parsers, so a fuzz test can check
// that the fast path agrees with go-containerregistry.
var (
	ParseImageFast = parseImageFast
	ParseImageSlow = parseImageSlow
)
