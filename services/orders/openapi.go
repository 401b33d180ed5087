package orders

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the REST API (openapi.json in this
// directory), served at /openapi.json. A test of the http package fails when
// it and the router disagree.
//
//go:embed openapi.json
var OpenAPI []byte
