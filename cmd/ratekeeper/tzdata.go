package main

// The binary carries the time zone database (about 450 KB), so that calendar
// windows in any zone work on an image without /usr/share/zoneinfo (scratch,
// a bare copy of the binary). The library does not import it: a program that
// embeds ratekeeper chooses for itself.
import _ "time/tzdata"
