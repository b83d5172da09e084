# The artifact store (issue #3) lands here: metadata and canonical payload bytes in PostgreSQL.
