module github.com/ferryq/ferry/otelferry

go 1.26.8

// ferry's modules, from this repository: replace directives count only
// here, in the repository (a service gets tagged versions), so each of
// ferry's modules builds and tests on its own.
replace (
	github.com/ferryq/ferry/internal/base => ../internal/base
	github.com/ferryq/ferry/migrations => ../migrations
)

require (
	github.com/ferryq/ferry/internal/base v0.0.0-00010101000000-000000000000
	github.com/riverqueue/river/rivertype v0.51.2
	github.com/stretchr/testify v1.12.1
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/riverqueue/river v0.51.2 // indirect
	github.com/riverqueue/river/riverdriver v0.51.2 // indirect
	github.com/riverqueue/river/rivershared v0.51.2 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.2 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
