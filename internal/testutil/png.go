package testutil

import (
	"image"
	"image/png"
	"os"
	"testing"
)

// DecodePNG reads a plot a test wrote back as an image, failing the test
// when it is missing or not a PNG.
func DecodePNG(t testing.TB, file string) image.Image {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return img
}
