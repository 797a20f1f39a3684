/* Dropping root (privileges.h). */
#include "privileges.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rm_identity_lookup(const char *user, struct rm_identity *out, char *why, size_t whylen)
{
	struct passwd pw, *found = NULL;
	long size = sysconf(_SC_GETPW_R_SIZE_MAX);
	char *buf = malloc(size > 0 ? (size_t)size : 16384);
	int err = buf ? getpwnam_r(user, &pw, buf, size > 0 ? (size_t)size : 16384, &found) : ENOMEM;
	int rc = -1;
	if (err)
		snprintf(why, whylen, "user %s: cannot look it up: %s", user, strerror(err));
	else if (!found)
		snprintf(why, whylen, "user %s: no such user", user);
	else if (snprintf(out->name, sizeof(out->name), "%s", pw.pw_name) >= (int)sizeof(out->name))
		snprintf(why, whylen, "user %s: a name longer than %zu bytes", user, sizeof(out->name) - 1);
	else {
		out->uid = pw.pw_uid;
		out->gid = pw.pw_gid;
		rc = 0;
	}
	free(buf);
	return rc;
}

int rm_identity_assume(const struct rm_identity *id, char *why, size_t whylen)
{
	uid_t r, e, s;
	gid_t rg, eg, sg;
	if (getresuid(&r, &e, &s) || getresgid(&rg, &eg, &sg)) {
		snprintf(why, whylen, "getresuid: %s", strerror(errno));
		return -1;
	}
	if (r == id->uid && e == id->uid && s == id->uid && rg == id->gid && eg == id->gid && sg == id->gid)
		return 0; /* started as that user: nothing to give up */
	/* Groups first: once the user id is gone, they can no longer be changed. */
	if (initgroups(id->name, id->gid)) {
		snprintf(why, whylen, "initgroups(%s): %s", id->name, strerror(errno));
		return -1;
	}
	if (setresgid(id->gid, id->gid, id->gid)) {
		snprintf(why, whylen, "setresgid(%u): %s", (unsigned)id->gid, strerror(errno));
		return -1;
	}
	if (setresuid(id->uid, id->uid, id->uid)) {
		snprintf(why, whylen, "setresuid(%u): %s", (unsigned)id->uid, strerror(errno));
		return -1;
	}
	if (getresuid(&r, &e, &s) || r != id->uid || e != id->uid || s != id->uid || getresgid(&rg, &eg, &sg) ||
	    rg != id->gid || eg != id->gid || sg != id->gid) {
		snprintf(why, whylen, "the user and group ids did not change to %u:%u", (unsigned)id->uid,
			 (unsigned)id->gid);
		return -1;
	}
	if (id->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
		snprintf(why, whylen, "root could be taken back after changing to %s", id->name);
		return -1;
	}
	return 0;
}
