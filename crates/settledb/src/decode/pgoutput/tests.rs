//! Message encoding and option parsing of the pgoutput plugin.
