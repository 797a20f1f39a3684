/* CUresult names and descriptions, generated from cuda.h. */
#ifndef REMORA_ERRORS_H
#define REMORA_ERRORS_H

struct rm_error_desc {
	int value;
	const char *name;
	const char *text;
};

extern const struct rm_error_desc rm_errors[];
extern const int rm_nerrors;

#endif
