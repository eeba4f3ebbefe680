"""Parts every chat adapter needs: Markdown splitting, a throttled flush pump, a bounded map,
and the access rule. They know no chat platform."""
