// expect: SPEC: no enum rm_handle_kind { ... }; to read the handle kinds from
/* no enum here */
