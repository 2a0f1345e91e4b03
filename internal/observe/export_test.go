package observe

// PerFamily makes a sampler dump with one request per address family, the
// fallback for kernels without TCPDIAG_GETSOCK (for tests).
func PerFamily(s *Sampler, on bool) { s.noCompat = on }
