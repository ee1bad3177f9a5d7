"""Worker sessions on this replica: the host of their streams (`hub`), the writer that batches what they
send into few transactions (`writer`), and the readers that turn lease changes into grants and revokes
(`reader`)."""
