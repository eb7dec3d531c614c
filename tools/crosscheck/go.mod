module github.com/pullguard/pullguard/tools/crosscheck

go 1.26.8

require (
	github.com/stretchr/testify v1.11.1
	golang.org/x/tools v0.42.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/mod v0.33.0 // indirect
	golang.org/x/sync v0.19.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
