package expr

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"

	"github.com/kilnci/kiln/internal/jsonwire"
)

// Values are JSON-shaped: nil, bool, float64, string, []any and
// map[string]any, as encoding/json decodes into an `any`. Callers building
// contexts by hand may also use the other Go integer and float types,
// json.Number, []string and map[string]string; they behave like their JSON
// counterparts. Any other Go value is opaque: truthy, equal to nothing, with
// no properties.

type valueKind int

const (
	vNull valueKind = iota
	vBool
	vNumber
	vString
	vArray
	vObject
	vOther
)

// norm turns the accepted numeric types into float64.
func norm(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int8:
		return float64(x)
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint:
		return float64(x)
	case uint8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint32:
		return float64(x)
	case uint64:
		return float64(x)
	case float32:
		return float64(x)
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return f
		}
		return string(x)
	}
	return v
}

// kindOf classifies a normalized value.
func kindOf(v any) valueKind {
	switch v.(type) {
	case nil:
		return vNull
	case bool:
		return vBool
	case float64:
		return vNumber
	case string:
		return vString
	case []any, []string:
		return vArray
	case map[string]any, map[string]string:
		return vObject
	}
	return vOther
}

var kindNames = [...]string{
	vNull: "null", vBool: "a bool", vNumber: "a number", vString: "a string",
	vArray: "an array", vObject: "an object", vOther: "an opaque value",
}

func arrayLen(v any) int {
	switch a := v.(type) {
	case []any:
		return len(a)
	case []string:
		return len(a)
	}
	return 0
}

func arrayAt(v any, i int) any {
	switch a := v.(type) {
	case []any:
		return norm(a[i])
	case []string:
		return a[i]
	}
	return nil
}

// objectGet reads a key; a missing key is nil.
func objectGet(v any, key string) any {
	switch o := v.(type) {
	case map[string]any:
		return norm(o[key])
	case map[string]string:
		if s, ok := o[key]; ok {
			return s
		}
	}
	return nil
}

func objectLen(v any) int {
	switch o := v.(type) {
	case map[string]any:
		return len(o)
	case map[string]string:
		return len(o)
	}
	return 0
}

func objectKeys(v any) []string {
	var keys []string
	switch o := v.(type) {
	case map[string]any:
		for k := range o {
			keys = append(keys, k)
		}
	case map[string]string:
		for k := range o {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Truthy reports whether v counts as true: false, 0, NaN, "" and nil are
// falsy; everything else, including empty arrays and objects, is truthy.
func Truthy(v any) bool {
	switch x := norm(v).(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0 && !math.IsNaN(x)
	case string:
		return x != ""
	}
	return true
}

// ToString renders a value as text: a string as-is, nil as "", bools as
// true/false, numbers without a decimal point when integral ("3") and in
// their shortest form otherwise, arrays and objects as compact JSON with
// sorted keys.
func ToString(v any) string {
	b, _ := appendString(nil, v, math.MaxInt)
	return string(b)
}

var errTooLong = errors.New("too long")

// maxValueDepth bounds how deeply nested a context value may be rendered or
// compared; JSON-decoded contexts are far shallower.
const maxValueDepth = 100

// appendString appends the text of v to b, failing with errTooLong once b
// would exceed limit bytes.
func appendString(b []byte, v any, limit int) ([]byte, error) {
	v = norm(v)
	switch x := v.(type) {
	case nil:
		return b, nil
	case string:
		if len(b)+len(x) > limit {
			return b, errTooLong
		}
		return append(b, x...), nil
	case float64:
		return formatNumber(b, x), nil
	}
	b = appendJSON(b, v, 0, limit)
	if len(b) > limit {
		return b, errTooLong
	}
	return b, nil
}

func formatNumber(b []byte, f float64) []byte {
	switch {
	case f == 0:
		return append(b, '0') // also -0, as JavaScript does
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	case f == math.Trunc(f) && math.Abs(f) < 1e21:
		return strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// appendJSON appends compact JSON. It stops early (returning a b longer than
// limit) once limit is passed, and writes null below maxValueDepth, for
// non-finite numbers and for values it cannot represent.
func appendJSON(b []byte, v any, depth, limit int) []byte {
	if len(b) > limit {
		return b
	}
	if depth > maxValueDepth {
		return append(b, "null"...)
	}
	v = norm(v)
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return append(b, "null"...)
		}
		return formatNumber(b, x)
	case string:
		return jsonwire.AppendString(b, x)
	}
	switch kindOf(v) {
	case vArray:
		b = append(b, '[')
		for i := range arrayLen(v) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, arrayAt(v, i), depth+1, limit)
			if len(b) > limit {
				return b
			}
		}
		return append(b, ']')
	case vObject:
		b = append(b, '{')
		for i, k := range objectKeys(v) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonwire.AppendString(b, k)
			b = append(b, ':')
			b = appendJSON(b, objectGet(v, k), depth+1, limit)
			if len(b) > limit {
				return b
			}
		}
		return append(b, '}')
	}
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}
