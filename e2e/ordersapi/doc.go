// Package ordersapi is a small client of the orders service's REST API
// (/v1), written against its published contract as an outside user would,
// for the end-to-end suite and the demo load generator.
package ordersapi
