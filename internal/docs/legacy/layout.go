package legacy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"mpsteer/internal/lab/results"
)

// A converted results.json keeps the layout it was first written in,
// which the docs check holds it to byte for byte: results.File's, less
// what only a run of `mpsteer lab run` records (whether it completed, the
// statistics method, the primary metric, the failed runs and the
// alternatives over the file; each variant's kind and median run; each
// comparison's direction and rounds), and without a variant's metrics when
// it has none.
var layout = shape{
	drop: []string{"complete", "statistics", "primary_metric", "failed_runs", "alternatives"},
	each: map[string]shape{
		"variants":            {drop: []string{"kind", "median_run"}, dropEmpty: []string{"metrics"}},
		"comparisons":         {drop: []string{"better", "rounds"}},
		"vs_best_alternative": {drop: []string{"better", "rounds"}},
	},
}

// shape is which members of a JSON object a layout leaves out: those
// named in drop, those in dropEmpty when they are {}, and for a key in
// each, within every member of the object there, what that shape leaves
// out.
type shape struct {
	drop, dropEmpty []string
	each            map[string]shape
}

func (s shape) apply(obj json.RawMessage) (json.RawMessage, error) {
	return members(obj, func(key string, v json.RawMessage) (json.RawMessage, bool, error) {
		if slices.Contains(s.drop, key) || (slices.Contains(s.dropEmpty, key) && string(v) == "{}") {
			return nil, false, nil
		}
		inner, ok := s.each[key]
		if !ok {
			return v, true, nil
		}
		v, err := members(v, func(_ string, m json.RawMessage) (json.RawMessage, bool, error) {
			m, err := inner.apply(m)
			return m, true, err
		})
		return v, true, err
	})
}

// members writes the JSON object obj again, its members in their order,
// each value as f gives it (keep false leaves the member out).
func members(obj json.RawMessage, f func(key string, v json.RawMessage) (json.RawMessage, bool, error)) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %.40s", obj)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		v, keep, err := f(key, v)
		if err != nil {
			return nil, err
		}
		if !keep {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k, err := compact(key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// compact is v's JSON, without escaping <, > and & (as the files have
// always been written).
func compact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// indented is the compact JSON c indented by two spaces, with a newline.
func indented(c []byte) ([]byte, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, c, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// encodeResults writes a converted results.json in its layout.
func encodeResults(f *results.File) ([]byte, error) {
	c, err := compact(f)
	if err != nil {
		return nil, err
	}
	if c, err = layout.apply(c); err != nil {
		return nil, err
	}
	return indented(c)
}
