package yamlcfg

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"mpsteer/internal/units"
)

// Decode reads m's keys into the struct v points to: one key per field
// tagged `yaml:"key"`, read with the accessor of the field's type, so that
// a problem is reported with its file, line and key like any other. The
// value a field holds before the call is its default. A struct's fields
// are the keys there are: a key of m that no field (and no other
// accessor) reads is reported by m.Done, with the list of valid keys.
//
// Field types and the tags that bound them (bounds are written as values
// of the field's own type, with their unit):
//
//	bool
//	string          enum:"a,b,c" (the valid values; any string without it)
//	int, float64    min:"1" max:"100" (both required: a plain number's range)
//	time.Duration, units.Rate, units.Size, units.Fraction
//	                min:"0s" max:"1GiB" above:"0s" (each optional; above is
//	                exclusive)
//	[]string        a list of values (the default stays when the key is absent)
//	a Field         a value that reads its key itself
//
// An embedded struct without a yaml tag has its fields read as if they
// were the outer struct's: a set of keys shared by several structs. A
// field without a yaml tag is not a key. A field of any other type is a
// bug of the caller, and panics.
func Decode(m *Map, v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("yamlcfg.Decode: %T is not a pointer to a struct", v))
	}
	decodeStruct(m, rv.Elem())
}

// Field is a value with a structure of its own (a list of mappings, a
// mapping of names to values): it reads key from m itself.
type Field interface {
	DecodeField(m *Map, key string)
}

// Keys lists the keys of the struct type of v (a struct or a pointer to
// one), in field order, the embedded structs' in their place.
func Keys(v any) []string {
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			key, ok := f.Tag.Lookup("yaml")
			switch {
			case !ok && f.Anonymous && f.Type.Kind() == reflect.Struct:
				walk(f.Type)
			case ok && key != "-":
				out = append(out, key)
			}
		}
	}
	walk(t)
	return out
}

// Unknown lists the keys of m that no accessor has asked for so far, in
// file order: what Done would report now.
func (m *Map) Unknown() []string {
	var out []string
	c := m.node.Content
	for i := 0; i+1 < len(c); i += 2 {
		if !m.known[c[i].Value] {
			out = append(out, c[i].Value)
		}
	}
	return out
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	rateType     = reflect.TypeFor[units.Rate]()
	sizeType     = reflect.TypeFor[units.Size]()
	fractionType = reflect.TypeFor[units.Fraction]()
	fieldType    = reflect.TypeFor[Field]()
)

func decodeStruct(m *Map, sv reflect.Value) {
	st := sv.Type()
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		key, ok := f.Tag.Lookup("yaml")
		if !ok {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				decodeStruct(m, sv.Field(i))
			}
			continue
		}
		if key == "-" {
			continue
		}
		fv := sv.Field(i)
		if !fv.CanSet() {
			panic(fmt.Sprintf("yamlcfg.Decode: field %s.%s (key %s) cannot be set: export it (and the type of an embedded struct)", st, f.Name, key))
		}
		decodeField(m, key, f, fv)
	}
}

func decodeField(m *Map, key string, f reflect.StructField, fv reflect.Value) {
	bug := func(format string, args ...any) {
		panic(fmt.Sprintf("yamlcfg.Decode: field %s (key %s): %s", f.Name, key, fmt.Sprintf(format, args...)))
	}
	if reflect.PointerTo(f.Type).Implements(fieldType) {
		fv.Addr().Interface().(Field).DecodeField(m, key)
		return
	}
	switch f.Type {
	case durationType:
		fv.SetInt(int64(decodeUnit(m, key, f.Tag, time.Duration(fv.Int()), m.Duration, units.ParseDuration, bug)))
		return
	case rateType:
		fv.SetFloat(float64(decodeUnit(m, key, f.Tag, units.Rate(fv.Float()), m.Rate, units.ParseRate, bug)))
		return
	case sizeType:
		fv.SetInt(int64(decodeUnit(m, key, f.Tag, units.Size(fv.Int()), m.Size, units.ParseSize, bug)))
		return
	case fractionType:
		fv.SetFloat(float64(decodeUnit(m, key, f.Tag, units.Fraction(fv.Float()), m.Fraction, units.ParseFraction, bug)))
		return
	}
	switch f.Type.Kind() {
	case reflect.Bool:
		fv.SetBool(m.Bool(key, fv.Bool()))
	case reflect.String:
		if enum, ok := f.Tag.Lookup("enum"); ok {
			fv.SetString(m.Enum(key, fv.String(), strings.Split(enum, ",")...))
		} else {
			fv.SetString(m.String(key, fv.String()))
		}
	case reflect.Int:
		lo, hi := numberRange(f.Tag, bug)
		if lo < math.MinInt || hi > math.MaxInt || lo != math.Trunc(lo) || hi != math.Trunc(hi) {
			bug("the range %v to %v is not one of whole numbers", lo, hi)
		}
		fv.SetInt(int64(m.Int(key, int(fv.Int()), int(lo), int(hi))))
	case reflect.Float64:
		lo, hi := numberRange(f.Tag, bug)
		fv.SetFloat(m.Float(key, fv.Float(), lo, hi))
	case reflect.Slice:
		if f.Type.Elem().Kind() != reflect.String {
			bug("type %s is not supported (a list of values is a []string)", f.Type)
		}
		if m.Has(key) {
			list := m.Strings(key)
			out := reflect.MakeSlice(f.Type, len(list), len(list))
			for i, s := range list {
				out.Index(i).SetString(s)
			}
			fv.Set(out)
		}
	default:
		bug("type %s is not supported", f.Type)
	}
}

// numberRange reads the min and max tags of a plain number.
func numberRange(tag reflect.StructTag, bug func(string, ...any)) (lo, hi float64) {
	min, okMin := tag.Lookup("min")
	max, okMax := tag.Lookup("max")
	if !okMin || !okMax {
		bug("a plain number needs min and max tags (its valid range)")
	}
	var err1, err2 error
	lo, err1 = strconv.ParseFloat(min, 64)
	hi, err2 = strconv.ParseFloat(max, 64)
	if err1 != nil || err2 != nil || lo > hi {
		bug("bad range min:%q max:%q", min, max)
	}
	return lo, hi
}

// decodeUnit reads a value with a unit and checks it against the field's
// bounds.
func decodeUnit[T time.Duration | units.Rate | units.Size | units.Fraction](m *Map, key string, tag reflect.StructTag, def T,
	read func(string, T) T, parse func(string) (T, error), bug func(string, ...any)) T {
	bound := func(name string) (T, bool) {
		s, ok := tag.Lookup(name)
		if !ok {
			return 0, false
		}
		b, err := parse(s)
		if err != nil {
			bug("bad %s tag: %v", name, err)
		}
		return b, true
	}
	lo, hasLo := bound("min")
	hi, hasHi := bound("max")
	above, hasAbove := bound("above")
	v := read(key, def)
	if !m.Has(key) || m.Failed(key) {
		return v
	}
	str := func(x T) string { return fmt.Sprint(x) }
	switch {
	case hasAbove && v <= above:
		m.Errorf(key, "must be above %s", str(above))
	case hasLo && hasHi && (v < lo || v > hi):
		m.Errorf(key, "%s is outside %s to %s", str(v), str(lo), str(hi))
	case hasLo && v < lo:
		m.Errorf(key, "%s is below %s", str(v), str(lo))
	case hasHi && v > hi:
		m.Errorf(key, "%s is above %s", str(v), str(hi))
	default:
		return v
	}
	return def
}
