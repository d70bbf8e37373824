"""Code the tests share, with no tests of its own: in-memory models and oracles to
compare against, workloads that crash tests run in child processes, throwaway servers,
and the small pipeline the pipeline tests build on."""
