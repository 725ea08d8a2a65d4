"""The personal API tokens page (`/api/tokens/`, session login): list, create, revoke. A new key
is shown once, in the response to the form that created it, and never stored in clear."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from webapp.api.forms import TokenCreateForm
from webapp.api.selectors import tokens_for_user
from webapp.api.services import token_create, token_revoke


@require_http_methods(["GET", "POST"])
def token_list(request):
    new_key = new_token = None
    status = 200
    if request.method == "POST":
        form = TokenCreateForm(request.POST, user=request.user)
        if form.is_valid():
            new_token, new_key = token_create(user=request.user, name=form.cleaned_data["name"],
                                              project=form.cleaned_data["project"],
                                              can_write=form.cleaned_data["access"] == "write")
            form = TokenCreateForm(user=request.user)
            status = 201
        else:
            status = 400
    else:
        form = TokenCreateForm(user=request.user)
    response = render(request, "api/tokens.html", {
        "form": form, "tokens": tokens_for_user(request.user), "new_key": new_key, "new_token": new_token,
        "api_root": request.build_absolute_uri("/api/"),
    }, status=status)
    if new_key:
        response["Cache-Control"] = "no-store"  # the only page that ever holds the key
    return response


@require_POST
def token_revoke_view(request, token_id: int):
    token = token_revoke(user=request.user, token_id=token_id)
    messages.success(request, f"Token “{token.name}” ({token.prefix}…) is revoked.")
    return redirect("api:tokens")
