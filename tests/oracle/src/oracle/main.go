// checkpoint-oracle: reads a JSON array of base64 checkpoint files on stdin and writes,
// for each, what kubelet's own decoding makes of it under the v2 and v1 structs (tests only).
package main

import (
	"checkpoint"
	"encoding/json"
	"os"
)

func main() {
	var inputs [][]byte
	if err := json.NewDecoder(os.Stdin).Decode(&inputs); err != nil {
		panic(err)
	}
	out := make([]map[string]checkpoint.Verdict, 0, len(inputs))
	for _, blob := range inputs {
		out = append(out, map[string]checkpoint.Verdict{"v2": checkpoint.V2(blob), "v1": checkpoint.V1(blob)})
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
