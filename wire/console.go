package wire

// TenantList is a page of GET /v1/tenants.
type TenantList struct {
	Tenants    []TenantView `json:"tenants"`
	NextCursor string       `json:"next_cursor,omitempty"`
}
