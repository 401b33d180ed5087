package http

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// Routes exposes the router to the OpenAPI sync test.
func Routes(h http.Handler) chi.Routes { return h.(chi.Routes) }
