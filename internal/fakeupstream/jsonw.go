package fakeupstream

import (
	"strconv"
	"taskgate/internal/jsonstr"
)

const hexDigits = "0123456789abcdef"

// appendKV appends `"key":` followed by the quoted value.
func appendKV(b []byte, key, value string) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return jsonstr.Append(b, value)
}

// appendKInt appends `"key":n`.
func appendKInt(b []byte, key string, n int64) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, n, 10)
}
