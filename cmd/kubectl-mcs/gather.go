package main

import "github.com/spf13/cobra"

func newGatherCmd(g *globals) *cobra.Command {
	return &cobra.Command{Use: "gather", Hidden: true}
}
