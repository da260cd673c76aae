// Command genref writes testdata/reference.tsv: token ids from tiktoken-go
// (offline ranks, ordinary encoding) for a few fixed strings. Run from the
// package folder: go run ./testdata/genref > testdata/reference.tsv
package main

import (
	"fmt"
	"strconv"
	"strings"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

func main() {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	texts := []string{
		"", "hello world", "Hello, World!", "I'm here, you're there, they'LL go.",
		"<|endoftext|>", "  two  spaces\n\nnewlines\r\n", "12345678", "日本語のテキスト",
		"emoji 👍🏽 ok", "func main() {\n\tfmt.Println(\"hi\")\n}\n", "invalid \xff\xfe bytes",
	}
	fmt.Println("# encoding\tGo-quoted text\ttoken ids (tiktoken-go v0.1.8 EncodeOrdinary)")
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		tk, err := tiktoken.GetEncoding(name)
		if err != nil {
			panic(err)
		}
		for _, t := range texts {
			ids := tk.EncodeOrdinary(t)
			s := make([]string, len(ids))
			for i, id := range ids {
				s[i] = strconv.Itoa(id)
			}
			fmt.Printf("%s\t%s\t%s\n", name, strconv.Quote(t), strings.Join(s, ","))
		}
	}
}
