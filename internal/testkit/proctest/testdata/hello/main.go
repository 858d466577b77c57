// Command hello is the binary that proctest's own tests build: it greets its
// arguments.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Println("hello", strings.Join(os.Args[1:], " "))
}
